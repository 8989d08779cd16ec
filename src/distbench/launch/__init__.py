"""Launch and watch: the worker command line, the rank processes, their topology, the watchdog and
the progress bar.
"""
