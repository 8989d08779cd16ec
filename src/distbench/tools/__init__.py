"""Tools around runs: plan, report, compare, schedule, server and the end-of-sweep summary (the
`distbench` CLI).
"""
