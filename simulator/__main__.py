"""``python -m simulator`` is the same as the ``dtsim`` console script."""

from simulator.cli import main

if __name__ == "__main__":
    main()
