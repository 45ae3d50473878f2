"""Notifications: subscriptions to cards, trees, boards and profiles, and the outbox their
events wait in (written with the transition that caused them) until the courier sends them."""
