"""The durable steps a workflow takes through ``ctx``: activities (and their scope),
timers, recorded values (memo, version pins) and search attributes."""
