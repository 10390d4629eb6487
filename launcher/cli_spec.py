"""Commands that read specs: validate, schema, launch (dry run / submit / --local). Owner: issue 2."""

COMMANDS: list = []
