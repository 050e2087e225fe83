"""The config-space decoder: register layout, short and garbage inputs, fuzzing."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from k3diag.parse.pci_config import (
    PCI_CAPABILITY_LIST,
    PCI_EXP_LNKSTA,
    PCI_STATUS,
    build_config,
    decode_config,
)

GPU = dict(vendor_id=0x10DE, device_id=0x20B5, class_code=0x0302, port_type="Endpoint",
           cap_speed_gts=16.0, cap_width=16, sta_speed_gts=16.0, sta_width=8)
DSP_ACS = dict(vendor_id=0x1000, device_id=0xC010, class_code=0x0604, bridge_buses=(2, 3, 3),
               port_type="Downstream Port", cap_speed_gts=32.0, cap_width=16, sta_speed_gts=2.5, sta_width=16,
               port_number=8,
               acs_cap={"SrcValid": True, "TransBlk": True, "ReqRedir": True, "CmpltRedir": True,
                        "UpstreamFwd": True, "EgressCtrl": False, "DirectTrans": True},
               acs_ctl={"SrcValid": True, "ReqRedir": True, "CmpltRedir": True, "UpstreamFwd": True})


def _build(spec: dict) -> bytes:
    spec = dict(spec)
    return build_config(spec.pop("vendor_id"), spec.pop("device_id"), spec.pop("class_code"), **spec)


def test_endpoint_link_fields() -> None:
    space = decode_config(_build(GPU))
    assert space.vendor_id == 0x10DE and space.device_id == 0x20B5
    assert space.class_code == 0x0302 and not space.is_bridge
    assert space.pcie is not None
    assert space.pcie.port_type == "Endpoint"
    assert (space.pcie.cap_speed_gts, space.pcie.cap_width) == (16.0, 16)
    assert (space.pcie.sta_speed_gts, space.pcie.sta_width) == (16.0, 8)
    assert space.pcie.supported_speeds_gts == [2.5, 5.0, 8.0, 16.0]
    assert space.pcie.target_speed_gts == 16.0
    assert space.acs is None and space.extended_readable and not space.warnings


def test_switch_port_with_acs_redirect() -> None:
    space = decode_config(_build(DSP_ACS))
    assert space.is_bridge
    assert (space.primary_bus, space.secondary_bus, space.subordinate_bus) == (2, 3, 3)
    assert space.pcie.port_type == "Downstream Port" and space.pcie.port_number == 8
    assert space.pcie.cap_speed_gts == 32.0 and space.pcie.sta_speed_gts == 2.5
    assert space.acs is not None
    assert space.acs.ctl == {"SrcValid": True, "TransBlk": False, "ReqRedir": True, "CmpltRedir": True,
                             "UpstreamFwd": True, "EgressCtrl": False, "DirectTrans": False}
    assert space.acs.cap["EgressCtrl"] is False and space.acs.cap["DirectTrans"] is True


def test_64_gts_and_link_down() -> None:
    data = bytearray(build_config(0x10DE, 1, 0x0302, port_type="Endpoint", cap_speed_gts=64.0, cap_width=16,
                                  sta_speed_gts=64.0, sta_width=16))
    space = decode_config(bytes(data))
    assert space.pcie.cap_speed_gts == 64.0
    # a link that is down reads width 0 and a reserved speed
    offset = space.pcie.offset + PCI_EXP_LNKSTA
    data[offset:offset + 2] = (0).to_bytes(2, "little")
    down = decode_config(bytes(data))
    assert down.pcie.sta_width == 0 and down.pcie.sta_speed_gts is None


def test_unprivileged_64_bytes_say_so() -> None:
    space = decode_config(_build(DSP_ACS)[:64])
    assert space.vendor_id == 0x1000 and space.is_bridge and space.secondary_bus == 3
    assert space.pcie is None and space.acs is None and not space.capabilities_readable
    assert any("first 64 bytes" in w for w in space.warnings)


def test_256_bytes_have_the_link_but_not_acs() -> None:
    space = decode_config(_build(DSP_ACS)[:256])
    assert space.pcie is not None and space.pcie.cap_width == 16
    assert space.acs is None and not space.extended_readable
    assert any("extended capabilities" in w for w in space.warnings)


def test_short_empty_and_dead_device() -> None:
    assert decode_config(b"").vendor_id is None
    assert "too short" in decode_config(b"\xde\x10").warnings[0]
    dead = decode_config(b"\xff" * 4096)
    assert dead.vendor_id is None and "did not answer" in dead.warnings[0]
    assert decode_config(_build(GPU)[:40]).warnings  # shorter than the header


def test_capability_loop_and_wild_pointer() -> None:
    data = bytearray(_build(GPU))
    data[0x41] = 0x40  # PM capability points to itself
    assert any("loops" in w for w in decode_config(bytes(data)).warnings)
    data = bytearray(_build(GPU))
    data[PCI_CAPABILITY_LIST] = 0x10  # into the header
    data[PCI_STATUS] |= 0x10
    assert any("outside" in w for w in decode_config(bytes(data)).warnings)
    data = bytearray(_build(DSP_ACS))
    data[0x100:0x104] = (0x0001 | (1 << 16) | (0x100 << 20)).to_bytes(4, "little")  # AER -> itself
    assert any("loops" in w for w in decode_config(bytes(data)).warnings)


@settings(max_examples=80, deadline=None)
@given(st.binary(max_size=4096))
def test_fuzz_random_bytes_never_raise(data: bytes) -> None:
    space = decode_config(data)
    assert space.length == len(data)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4095), st.integers(0, 255)), max_size=40), st.sampled_from([64, 256, 4096]))
def test_fuzz_mutated_real_layout_never_raises(flips: list[tuple[int, int]], length: int) -> None:
    data = bytearray(_build(DSP_ACS))
    for offset, value in flips:
        data[offset] = value
    space = decode_config(bytes(data[:length]))
    if space.pcie is not None and space.pcie.cap_width is not None:
        assert 0 < space.pcie.cap_width < 64
