"""Figures: pure metric formulas, the analytic planner model and the equivalence check."""
