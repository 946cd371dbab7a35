"""What every package may use, and which imports nothing above it: settings (the one reader of the
environment), the log, time, domain errors with their codes, strict JSON text, turning pydantic and
JSON Schema failures into errors that name the field (and the JSON Schema validator for hostile tool
schemas), what every edge answers with, what a tool call answers (an Outcome), the words of an
agent's history (causes), the characters that hide in text a model reads (`text`), and what a
name or a value's shape says is a credential, never shown (`sensitive`)."""
