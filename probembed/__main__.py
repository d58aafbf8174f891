"""`python -m probembed`: the same command line as `probembed`."""

from probembed.interfaces import main

main()
