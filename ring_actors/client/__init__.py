"""One client, with no Ray in it: its round loop, the ring lap, fault behaviour, its checkpoint."""
