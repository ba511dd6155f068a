"""The project's own Delta tables (inventory, audit): how they are read and the one path that commits to them."""
