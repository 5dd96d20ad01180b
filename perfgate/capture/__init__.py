"""Running a workload under nsys: the command, the launch, its private folder, autostep, redaction."""
