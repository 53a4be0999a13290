/*
 * Symbolizer: maps instruction addresses of this process to the loaded
 * object (file, build id, ELF virtual address) and to a function name.
 *
 * Threading: a symbolizer belongs to one thread (the profiler loop thread);
 * it is not thread-safe. It reads /proc/self/maps and ELF files, so it may
 * block on file I/O: never call it from a signal handler or the nginx event
 * loop. It never calls dl_iterate_phdr (no loader lock).
 *
 * Memory: objects, names and build ids are owned by the symbolizer and stay
 * valid until prof_symbolizer_destroy() (refresh keeps known objects).
 */

#ifndef PROF_SYMBOLIZER_H
#define PROF_SYMBOLIZER_H

#include <stdint.h>


typedef struct prof_symbolizer_s  prof_symbolizer_t;

typedef struct {
    unsigned      id;           /* 1, 2, ...: stable for the symbolizer */
    uint64_t      start;        /* runtime range of the executable mapping */
    uint64_t      end;
    uint64_t      file_offset;  /* file offset of start */
    uint64_t      load_bias;    /* ELF virtual address = pc - load_bias */
    const char   *path;
    const char   *build_id;     /* lowercase hex, "" when the file has none */
} prof_object_t;


prof_symbolizer_t *prof_symbolizer_create(void);
void prof_symbolizer_destroy(prof_symbolizer_t *sym);

/*
 * Where debug files are looked up by build id
 * (default "/usr/lib/debug/.build-id"): <dir>/xx/yyyy.debug.
 */
int prof_symbolizer_set_debug_dir(prof_symbolizer_t *sym, const char *dir);

/* Re-reads /proc/self/maps (new objects after dlopen). 0 or -errno. */
int prof_symbolizer_refresh(prof_symbolizer_t *sym);

/*
 * Finds the object mapping pc (refreshing once when pc is unknown) and the
 * function containing it: the file's .symtab when present, else the
 * .symtab of the debug file found by build id, else .dynsym (a stripped
 * library always has one, so the debug file must come first). *function
 * is NULL when no symbol covers pc. Returns NULL when no object maps pc.
 * Deleted files are objects without symbols; the vdso is read from memory.
 */
const prof_object_t *prof_symbolize(prof_symbolizer_t *sym, uint64_t pc,
    const char **function);

/* The objects mapped at the last refresh, by address (0 .. count - 1). */
size_t prof_symbolizer_object_count(prof_symbolizer_t *sym);
const prof_object_t *prof_symbolizer_object(prof_symbolizer_t *sym,
    size_t i);


#endif /* PROF_SYMBOLIZER_H */
