// 09_5d/train.cpp — chapter 09: the 5D trainer (dp + ZeRO, tp + sp, cp, pp, ep in one program). A placeholder
// on the planner's branch: the trainer itself lands from the other chapter-09 branch; this file only makes the
// chapter exist for the Makefile (its CHAPTERS list is the folders with a train.cpp), so tests_09 builds.
//
// Playbook: "5D parallelism in a nutshell". Run: build/bin/09_5d (prints this and exits 0); the planner is
// build/bin/09_5d_plan (09_5d/PLANNER.md).
#include <cstdio>

int main() {
    std::printf("09_5d: the 5D trainer lands from the other chapter-09 branch; the layout planner is build/bin/09_5d_plan\n");
    return 0;
}
