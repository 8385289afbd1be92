// Empty on purpose: see package.json.
