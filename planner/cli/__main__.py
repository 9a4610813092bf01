"""`python -m planner.cli`: the `planner` command."""

from . import main

if __name__ == "__main__":
    main()
