"""One module per notebook with the checkers of that notebook's exercises."""
