"""Remote backends: one HTTP transport with its failure policy, and replicas."""
