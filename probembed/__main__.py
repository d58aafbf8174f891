"""`python -m probembed`: the same command line as `probembed`."""

from probembed.interfaces import main

if __name__ == "__main__":  # not when a spawned child process imports this module
    main()
