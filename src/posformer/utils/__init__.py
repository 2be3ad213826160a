"""Small helpers shared by every layer; they import nothing else from posformer.

| module | what |
|---|---|
| validation | the field checks every settings object shares (Config, run settings, QA options, experiments) |
| tensor_checks | checks on tensor values that never make the host wait for a device |
| user_files | reading the files a user names, every failure a clear error naming the file |
| file_limits | the size limit of each kind of file, and the one bounded reader every whole-file read goes through |
| figure | matplotlib on the Agg backend and atomic PNG writes, for every drawing |
| safe_write | every file written: whole through a temporary file and a rename, never through a symlink |
"""
