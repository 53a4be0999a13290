/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * What the master prepares for its workers at each cycle (init_module),
 * as root: the unwind tables they inherit, the dump directory they write,
 * and once for its life the symbol store their profiler processes share.
 */

#include "ngx_http_profiling_module.h"


/* Built by the master for the cycle, inherited by its workers. */
static prof_unwind_table_t  *ngx_http_profiling_unwind_table;

/* Made by the master once, kept across its cycles (the module is never
   unloaded: -z nodelete), inherited by its workers: -1 none. */
static int  ngx_http_profiling_symbol_store_fd = -1;


static void
ngx_http_profiling_free_unwind_table(void *data)
{
    if (ngx_http_profiling_unwind_table == data) {
        ngx_http_profiling_unwind_table = NULL;
    }

    prof_unwind_table_free(data);
}


/*
 * The unwind tables of the objects loaded now (nginx, its modules and
 * libraries), built once in the master: every worker inherits them with
 * fork instead of building its own (~12 ms and 2.5 MB each). They go with
 * the cycle; a worker started later with a table of an older cycle still
 * has its own copy.
 */
void
ngx_http_profiling_share_unwind_table(ngx_cycle_t *cycle)
{
    ngx_core_conf_t      *ccf;
    ngx_pool_cleanup_t   *cln;
    prof_unwind_table_t  *t;

    ccf = (ngx_core_conf_t *) ngx_get_conf(cycle->conf_ctx, ngx_core_module);

    /* Without a master, the worker's own sampler builds it; a process
       that only signals the master needs none. */
    if (!ccf->master || ngx_process == NGX_PROCESS_SIGNALLER) {
        return;
    }

    cln = ngx_pool_cleanup_add(cycle->pool, 0);
    if (cln == NULL) {
        return;
    }

    t = prof_unwind_table_build();
    if (t == NULL) {
        return;
    }

    cln->handler = ngx_http_profiling_free_unwind_table;
    cln->data = t;
    ngx_http_profiling_unwind_table = t;
}


/*
 * As root, the dump directory made for the workers' user when missing:
 * created 0700 and owned through its descriptor, never through a path a
 * symbolic link could redirect; an existing one is left as it is (a
 * worker that cannot write it says so once, at its start).
 */
void
ngx_http_profiling_make_dump_dir(ngx_cycle_t *cycle, u_char *path)
{
    int               fd, created;
    ngx_err_t         err;
    ngx_core_conf_t  *ccf;
    struct stat       st;

    created = 1;

    if (mkdir((char *) path, 0700) == -1) {
        err = ngx_errno;
        if (err != NGX_EEXIST) {
            ngx_log_error(NGX_LOG_ERR, cycle->log, err,
                          "profiling_dump_dir: mkdir(\"%s\") failed, "
                          "profiles will not be written", path);
            return;
        }
        created = 0;
    }

    fd = open((char *) path, O_RDONLY|O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC);
    if (fd == -1) {
        err = ngx_errno;

        if (lstat((char *) path, &st) == 0 && S_ISLNK(st.st_mode)) {
            ngx_log_error(NGX_LOG_ERR, cycle->log, 0,
                          "profiling_dump_dir \"%s\" is a symbolic link, "
                          "which is not followed (name the directory it "
                          "points to): profiles will not be written", path);
            return;
        }

        ngx_log_error(NGX_LOG_ERR, cycle->log, err,
                      "profiling_dump_dir \"%s\" cannot be opened, "
                      "profiles will not be written", path);
        return;
    }

    if (created) {
        (void) fchmod(fd, 0700);

        ccf = (ngx_core_conf_t *) ngx_get_conf(cycle->conf_ctx,
                                               ngx_core_module);

        if (geteuid() == 0 && ccf->user != (ngx_uid_t) NGX_CONF_UNSET_UINT
            && fchown(fd, ccf->user, ccf->group) == -1)
        {
            ngx_log_error(NGX_LOG_ERR, cycle->log, ngx_errno,
                          "profiling_dump_dir: fchown(\"%s\", %d) failed",
                          path, ccf->user);
        }
    }

    (void) close(fd);
}


/*
 * In a worker: the tables the master built for the cycle, inherited; NULL
 * without them (the worker's sampler builds its own).
 */
prof_unwind_table_t *
ngx_http_profiling_inherited_unwind_table(void)
{
    return ngx_http_profiling_unwind_table;
}


/*
 * The symbol store (profiler/symbol_store.h): the decompressed DWARF of
 * the files read for inlined functions, built by the first profiler
 * process that needs it and mapped by every other, of this cycle's
 * workers and the next cycles'. Without one, each reads its own.
 */
void
ngx_http_profiling_make_symbol_store(ngx_cycle_t *cycle)
{
    int  fd;

    if (ngx_http_profiling_symbol_store_fd != -1
        || ngx_process == NGX_PROCESS_SIGNALLER)
    {
        return;
    }

    fd = prof_symbol_store_create();
    if (fd < 0) {
        ngx_log_error(NGX_LOG_NOTICE, cycle->log, -fd,
                      "profiling: no symbol store, every profiler process "
                      "reads its own debug files");
        return;
    }

    ngx_http_profiling_symbol_store_fd = fd;
}


int
ngx_http_profiling_symbol_store(void)
{
    return ngx_http_profiling_symbol_store_fd;
}
