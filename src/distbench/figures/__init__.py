"""Figures: pure metric formulas and the planner's model (params, model_states, activations,
memory, communication, step_time -> job_terms -> predict -> recommend), each with its sources."""
