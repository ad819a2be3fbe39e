"""Statistics shared by the measures: bootstrap intervals over sentences (``bootstrap``),
multiple-testing corrections and power (``multiple_testing``), Student's t (``student_t``)."""
