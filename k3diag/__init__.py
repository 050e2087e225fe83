"""k3diag: why a multi-GPU server will or will not serve a huge model well."""

__version__ = "0.1.0"
