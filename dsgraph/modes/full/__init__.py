"""Full-graph training: one optimizer step per epoch on the whole graph, split by the strategy."""
