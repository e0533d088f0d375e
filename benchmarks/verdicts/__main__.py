"""``python -m benchmarks.verdicts``."""

from benchmarks.verdicts import main

if __name__ == "__main__":
    main()
