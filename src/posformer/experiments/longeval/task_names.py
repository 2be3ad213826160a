"""The suite's tasks by name, in the order they run: what `--tasks` offers, read without torch (the command's `--help`
imports no model code); `tasks.TASKS` holds the task objects under these names.

| task | RULER's | haystack | depth | answer |
|---|---|---|---|---|
| single_noise | niah_single_1 | noise | yes | a 5-digit number |
| single_number | niah_single_2 | book | yes | a 5-digit number |
| single_word | (word values) | book | yes | a word |
| single_uuid | niah_single_3 | book | yes | an 8-hex-digit code |
| multikey | niah_multikey_1 | book | yes | the asked key's number, 3 distractor needles |
| multivalue | niah_multivalue | book | no | the key's 3 numbers, in order |
| multiquery | niah_multiquery | book | no | 2 of 4 keys' numbers, in the order asked |
| vt | vt | noise | no | 3 variable names |
| cwe | cwe | none | no | 3 words |
| fwe | fwe | none | no | 3 words |
"""

TASK_NAMES = (
    "single_noise",
    "single_number",
    "single_word",
    "single_uuid",
    "multikey",
    "multivalue",
    "multiquery",
    "vt",
    "cwe",
    "fwe",
)
