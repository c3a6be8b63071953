"""Observability: process-wide counters (stats), explain reports, stage dumps."""
