"""What a run writes and reads back: durable writes, the run folder's names, allowlisted
loading of pickled state, and credentials kept out of every file."""
