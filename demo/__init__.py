"""`make demo`: the whole pipeline end to end on a realistic local lake."""
