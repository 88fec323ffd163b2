"""Print the ground-truth table: ``python -m simlab.cluster``."""

from simlab.cluster.report import markdown_table

if __name__ == "__main__":
    print(markdown_table())
