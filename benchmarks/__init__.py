"""Speed figures, printed by scripts (never asserted in unit tests). ``make bench`` runs them all."""
