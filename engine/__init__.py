"""dpsql engine: SQL in, private answers out."""
