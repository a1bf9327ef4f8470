"""Built-in tasks generated offline from a seed (arithmetic, standard-library functions), with verifiers."""
