"""Text handling: cleaning user input, keyword tokenisation and code-point budgets."""
