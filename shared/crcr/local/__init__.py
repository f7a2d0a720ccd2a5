"""`crcr local`: the relay's handlers on one machine against an embedded AWS (moto server)."""
