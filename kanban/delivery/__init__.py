"""Delivery: targets, senders and the courier that cron's results and notifications share."""
