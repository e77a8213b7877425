"""Fixed UT constructions: `sparse` (tree routing) and `gaussian` (random)."""
