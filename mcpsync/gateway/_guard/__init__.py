"""The gateway's guard: what a host may call, and on what terms (policy, approval, budgets)."""
