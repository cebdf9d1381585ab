"""posttrain: the command line that drives the pipeline (`posttrain --help`)."""
