# The --post postprocessors (src/post/post.c): plans, rejections and known answers per kind.
si_add_test(test_post SOURCES test_post.c LABELS unit)
