"""One test module per codemod (before/after, declines, equivalence), plus their composition."""
