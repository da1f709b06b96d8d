"""Code of one's own named in a config: ``module:Name`` values (``paths``) and methods looked
up by name, built in or registered by an installed package (``methods``)."""
