"""Cost models over features of the lowered IR (XGBoost ranker; see the cost-model issue)."""
