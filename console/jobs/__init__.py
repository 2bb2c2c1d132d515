"""Jobs: spec, plan, launch, state store, failure diagnosis."""
