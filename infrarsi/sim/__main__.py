"""Print the ground-truth table: ``python -m infrarsi.sim``."""

from infrarsi.sim.report import markdown_table

if __name__ == "__main__":
    print(markdown_table())
