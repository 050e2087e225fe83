from k3diag.cli import main

main()
