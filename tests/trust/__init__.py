"""Tests: the judge-trust mechanisms (amaris.trust), every tier."""
