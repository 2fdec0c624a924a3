"""An example forge-zoo plugin package: REINFORCE with a group-mean baseline (vanilla_pg)."""
