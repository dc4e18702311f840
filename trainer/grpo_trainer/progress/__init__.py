"""Training progress out of verl: Prometheus metrics and GRPOJob status, via a verl tracking backend."""
