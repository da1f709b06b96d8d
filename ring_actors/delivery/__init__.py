"""How payloads travel: their types and checks, the transport interface, inbox, outbox, spool."""
