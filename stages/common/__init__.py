"""What every trainer shares: its config's common fields, its inputs, the process group, the event
stream, the one checkpointer (resume state, final checkpoint, metrics and lineage), and the RL
policy's training engine and weight pushes."""
