"""Datasets as uint8 arrays, their partition over clients, and on-device batches."""
