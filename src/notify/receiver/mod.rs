//! Receivers: where notifications go (email, webhook, slack, alertmanager).
