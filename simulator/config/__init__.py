"""Declarations: strict, frozen pydantic models for everything a user or a catalog writes down."""
