"""union."""
