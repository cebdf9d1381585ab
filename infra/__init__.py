"""Infrastructure shared by every pipeline stage (storage, compute plumbing)."""
