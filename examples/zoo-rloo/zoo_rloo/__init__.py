"""An example forge-zoo plugin package: the RLOO algorithm."""
