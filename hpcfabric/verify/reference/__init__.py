"""The scalar reference: one frame through one switch (``pipeline``, ``flatten``) and through the fabric (``walk``)."""
