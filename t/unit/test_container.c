/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Tests of the container detection (shared/profiler/container.h) on
 * cgroup v1 and v2 texts as Docker, containerd, CRI-O, Kubernetes, ECS
 * and systemd write them, and on the process running the test.
 */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "profiler/container.h"


#define ID64  "3726184226f5d3147c25fdeab5b60097e378e8a720503a5e19ecfdf29f869860"


static void
check(const char *text, const char *want_id, const char *want_v2)
{
    char  id[PROF_CONTAINER_ID_MAX + 1], v2[512];

    assert_int_equal(prof_container_parse(text, strlen(text), id, sizeof(id),
                                          v2, sizeof(v2)), 0);
    assert_string_equal(id, want_id);
    assert_string_equal(v2, want_v2);
}


static void
test_cgroup_v1(void **state)
{
    /* Docker */
    check("12:pids:/docker/" ID64 "\n"
          "11:hugetlb:/docker/" ID64 "\n"
          "1:name=systemd:/docker/" ID64 "\n", ID64, "");

    /* Kubernetes */
    check("11:cpu,cpuacct:/kubepods/besteffort/"
          "pod3d274242-8ee0-11e9-a8a6-1e68d864ef1a/" ID64 "\n", ID64, "");

    /* systemd scopes of container runtimes */
    check("1:name=systemd:/system.slice/docker-" ID64 ".scope\n", ID64, "");
    check("5:cpu:/kubepods.slice/crio-" ID64 ".scope\n", ID64, "");

    /* ECS: a task id; Fargate: a UUID */
    check("9:perf_event:/ecs/haissam-ecs-classic/"
          "5a0d5ceddf6c44c1ad4f3ed38a2c4af8-3622353007\n",
          "5a0d5ceddf6c44c1ad4f3ed38a2c4af8-3622353007", "");
    check("3:cpu:/ecs/55091c13-b8cf-4801-b527-f4601742204d\n",
          "55091c13-b8cf-4801-b527-f4601742204d", "");

    /* No container: a host's systemd service */
    check("1:name=systemd:/system.slice/nginx.service\n", "", "");
}


static void
test_cgroup_v2(void **state)
{
    check("0::/system.slice/nginx.service\n", "",
          "/system.slice/nginx.service");
    check("0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-"
          ID64 ".scope\n", ID64,
          "/kubepods.slice/kubepods-burstable.slice/cri-containerd-" ID64
          ".scope");

    /* Not an id: wrong length, not hex, a hex run inside a name. */
    check("0::/docker/" "3726184226f5d3147c25fdeab5b60097e378e8a7\n", "",
          "/docker/3726184226f5d3147c25fdeab5b60097e378e8a7");
    check("0::/x/zz26184226f5d3147c25fdeab5b60097e378e8a720503a5e19ecfdf29f8"
          "69860\n", "",
          "/x/zz26184226f5d3147c25fdeab5b60097e378e8a720503a5e19ecfdf29f8"
          "69860");
}


static void
test_malformed_text(void **state)
{
    char  id[PROF_CONTAINER_ID_MAX + 1], v2[8];

    assert_int_equal(prof_container_parse("", 0, id, sizeof(id), v2,
                                          sizeof(v2)), -1);
    assert_int_equal(prof_container_parse("garbage", 7, id, sizeof(id), v2,
                                          sizeof(v2)), -1);

    /* A v2 path longer than the room for it: left out, not cut. */
    assert_int_equal(prof_container_parse("0::/a/very/long/path\n", 21, id,
                                          sizeof(id), v2, sizeof(v2)), 0);
    assert_string_equal(v2, "");
    assert_int_equal(prof_container_parse("0:", 2, id, sizeof(id), v2,
                                          sizeof(v2)), -1);
}


static void
test_entity_id(void **state)
{
    prof_container_t  c;

    memset(&c, 0, sizeof(c));
    strcpy(c.container_id, ID64);
    prof_container_entity(&c, 1234);
    assert_string_equal(c.entity_id, "ci-" ID64);

    memset(&c, 0, sizeof(c));
    prof_container_entity(&c, 1234);
    assert_string_equal(c.entity_id, "in-1234");

    memset(&c, 0, sizeof(c));
    prof_container_entity(&c, 0);
    assert_string_equal(c.entity_id, "");

    /* This process: whatever it runs in, a consistent answer. */
    prof_container_detect(&c);
    if (c.container_id[0] != '\0') {
        assert_int_equal(strncmp(c.entity_id, "ci-", 3), 0);
    }
}


int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cgroup_v1),
        cmocka_unit_test(test_cgroup_v2),
        cmocka_unit_test(test_malformed_text),
        cmocka_unit_test(test_entity_id),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
